"""Beyond the survey: attention in today's models and at scale."""
