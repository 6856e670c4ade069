"""``python -m rag_monitor.cli``: the same command line as ``rag-monitor``."""

import sys

from rag_monitor.cli import main

sys.exit(main())
