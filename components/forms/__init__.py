"""The forms config values are written in, shared by the stack's and the run's config: Pulumi's
config forms and their JSON schema hooks (pulumi_forms.py), Hydra overrides (hydra_overrides.py)
and image references (image_refs.py).

Imported by components/runspec, components/schema and above; it imports only components/messages.py."""
