import sys

from mirror.cli import main

sys.exit(main())
