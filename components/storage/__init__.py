"""The bucket as the pods see it: the GCS FUSE volumes (gcs_fuse_storage.py), the model's staging
Job and its in-cluster script (model_staging.py, staging/), and a local working directory
uploaded one object per file (working_dir.py).

Imported by components/raycluster and __main__.py; it imports the facts and the config below it."""
