import sys

from shared.campaign.cli import main

sys.exit(main())
