"""spark-submit's primary resource in the image: the ``connmon`` command line, so that
``spark-submit ... spark-main.py job --config ...`` runs ``connmon job`` as the Spark driver."""

import sys

from streaming.cli import main

sys.exit(main())
