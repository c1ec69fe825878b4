"""repairbot: coding-agent bug repairs as durable workflows."""
