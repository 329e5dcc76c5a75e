"""The `nettrail` command: thin subcommands over the agent (collector/), the analysis
library (analysis/) and the webapp's database (webapp/, imported lazily)."""
