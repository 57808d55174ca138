"""A run's config and what is derived from it: the pydantic model (run_config.py), its sizing,
memory, identity, environment, resume and inputs (run_*.py), the checks of the user's own
experiment (run_experiment.py), the lifecycle keys (lifecycle.py) and the run resolved once for
the components and tools (run.py, ResolvedRun).

Imported by the stack's config (components/schema) and every room above it; it imports only the
facts and the config's forms (components/forms)."""
