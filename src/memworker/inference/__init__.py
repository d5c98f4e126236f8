"""Inference: the dynamic schema, the grammar, the codec and the backends the store calls.

    schema.build_schema(task, inputs)   per-request wire schema (choices from the inputs)
    grammar.schema_to_gbnf(schema)      our strict JSON-schema -> GBNF converter
    codec.run(backend, task, inputs)    generate, verify, canonicalise; retry once; typed errors
    backends.*                          LlamaCppBackend, OllamaBackend, OpenAICompatBackend
    hmem.MemWorkerBackend               hmem-shaped candidates for the store
    rules.RulesBackend                  the deterministic rules baseline, a backend like the others

See inference/README.md for the design and a runnable example.
"""
