"""Live acceptance: the worker inside a small hmem-shaped SQLite store, over scripted
multi-session scenarios (EVAL_SPEC § Live acceptance). Entry script: `eval/live.py`."""
