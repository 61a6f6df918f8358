import sys

from shared.campaign.commands import main

sys.exit(main())
