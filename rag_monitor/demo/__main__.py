"""``python -m rag_monitor.demo``: the same as ``rag-monitor demo``."""

import sys

from rag_monitor.demo.run import main

if __name__ == "__main__":
    sys.exit(main())
