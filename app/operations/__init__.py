"""What operators use: views and actions on runs for the CLI and the dashboard,
API tokens, App registration, migrations, metrics and per-installation caps."""
