"""`python -m jaxbatch`: the `jaxbatch` command."""

import sys

from jaxbatch._src.cli.main import main

sys.exit(main())
