"""Deterministic guards: credential-shaped strings and memory-control instructions.

Both the codec (at inference time) and the corpus audit (at build time) use these, so what the
worker is trained never to retain is exactly what the codec strips.

    >>> contains_credential("my token is ghp_aaaaaaaaaaaaaaaaaaaaaaaa1234")
    True
    >>> redact("password: hunter22!")
    'password: [REDACTED]'
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"

# (kind, pattern). Patterns that carry a keyword keep it outside the "secret" group so redaction
# leaves "password: [REDACTED]" readable.
_CREDENTIAL_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("private_key", re.compile(
        r"(?P<secret>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----)?)",
        re.S)),
    ("openai_key", re.compile(r"(?P<secret>\bsk-(?:proj-|live-|test-)?[A-Za-z0-9_-]{16,})")),
    ("github_token", re.compile(r"(?P<secret>\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}))")),
    ("aws_access_key", re.compile(r"(?P<secret>\b(?:AKIA|ASIA)[0-9A-Z]{16}\b)")),
    ("slack_token", re.compile(r"(?P<secret>\bxox[abposr]-[A-Za-z0-9-]{10,})")),
    ("google_api_key", re.compile(r"(?P<secret>\bAIza[0-9A-Za-z_-]{30,})")),
    ("stripe_key", re.compile(r"(?P<secret>\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,})")),
    ("jwt", re.compile(r"(?P<secret>\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})")),
    ("bearer_token", re.compile(r"\b[Bb]earer\s+(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)")),
    ("url_credentials", re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s:/@]+:(?P<secret>[^\s@/]+)@")),
    ("assigned_secret", re.compile(
        r"(?i)\b(?:password|passwd|passphrase|pass ?code|pin(?: code)?|(?:door|gate|alarm|lock|safe) code|api[ _-]?key|access[ _-]?key|"
        r"secret(?:[ _-]?key)?|auth[ _-]?token|access[ _-]?token|token)"
        r"(?:\s+(?:is|was|=|:)|\s*[:=])\s*[\"'`]?(?P<secret>[^\s\"'`,;]{4,})")),
    ("long_hex", re.compile(r"(?P<secret>\b[0-9a-fA-F]{40,}\b)")),
]

_WORDS_NOT_SECRETS = {"required", "redacted", "[redacted]", "missing", "expired", "invalid",
                      "rotated", "revoked", "changed", "updated", "stored", "saved", "correct",
                      "wrong", "incorrect", "the", "a", "my", "your", "still", "now", "set", "reset"}


def find_credentials(text: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of every credential-shaped secret in `text`, sorted, non-overlapping."""
    spans: list[tuple[int, int, str]] = []
    for kind, pattern in _CREDENTIAL_PATTERNS:
        for m in pattern.finditer(text):
            start, end = m.span("secret")
            secret = m.group("secret")
            if REDACTED in secret or (
                kind == "assigned_secret" and secret.lower().strip(".!?") in _WORDS_NOT_SECRETS
            ):
                continue
            spans.append((start, end, kind))
    spans.sort()
    merged: list[tuple[int, int, str]] = []
    for start, end, kind in spans:
        if merged and start < merged[-1][1]:
            prev = merged[-1]
            merged[-1] = (prev[0], max(prev[1], end), prev[2])
        else:
            merged.append((start, end, kind))
    return merged


def contains_credential(text: str) -> bool:
    return bool(find_credentials(text))


def redact(text: str) -> str:
    """`text` with every credential replaced by [REDACTED]."""
    out, last = [], 0
    for start, end, _ in find_credentials(text):
        out.append(text[last:start])
        out.append(REDACTED)
        last = end
    out.append(text[last:])
    return "".join(out)


_MEMORY_CONTROL = re.compile(
    r"(?i)\b(?:"
    r"ignore (?:all |any |the |your )?(?:previous |prior |above |earlier )?(?:instructions|rules|prompts?)"
    r"|disregard (?:all |any |the |your )?(?:previous |prior |above )?(?:instructions|rules)"
    r"|(?:forget|delete|erase|wipe|clear|drop|remove) (?:all |everything |every |the |your |any )*"
    r"(?:memor(?:y|ies)|facts?|records?|notes?|history|what you know)"
    r"|(?:update|overwrite|modify|edit) (?:your |the )?(?:memory|memories|facts?|records?)"
    r"|(?:store|save|remember|record|add|write) (?:this |that |the following )?(?:to|in|into) "
    r"(?:your |the )?(?:memory|memories|long[- ]term memory|store)"
    r"|(?:assistant|system|ai|model)s?,? (?:must|should|shall) (?:now )?(?:remember|store|record|believe|forget)"
    r"|new (?:system )?instructions?:"
    r"|system prompt"
    r"|you are now"
    r"|from now on,? (?:you|the assistant|treat|consider|remember|store|always)"
    r")"
)


def is_memory_control(text: str) -> bool:
    """True when `text` tries to instruct the memory worker (store/forget/override/ignore rules)."""
    return bool(_MEMORY_CONTROL.search(text))
