#!/usr/bin/env python
"""Rebuild the shipped release from the clone, byte for byte, and verify it
(`memworker.export.rebuild`; CI runs it):

    python export/rebuild.py            # release/ from the committed adapter and receipts
"""

import sys

from memworker.export.rebuild import main

if __name__ == "__main__":
    sys.exit(main())
