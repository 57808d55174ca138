"""What the run reports: the Ray log shipper sidecar (log_shipper.py), the training log's lines
as RE2 patterns (training_log.py, log_metrics.py), the dashboard as data (dashboard.py), the
alerts' scope (scope.py) and the TrainingObservability component (training_observability.py).

Imported by components/raycluster and __main__.py; it imports the facts and the config below it."""
