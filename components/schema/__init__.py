"""The stack's config: its model (stack_config.py), reading it and the checks of each key
(config.py), the checks that span keys (config_checks.py), its enums (choices.py), the `staging`
and `observability` objects (staging.py, observability.py) and every derived cloud name
(names.py).

Imported by every component room and __main__.py; it imports the run's config
(components/runspec), the forms (components/forms) and the facts below it."""
