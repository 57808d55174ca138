"""The image mirror: an Artifact Registry remote repository of Docker Hub in the stack's region
(image_mirror.py), which every pod image is pulled through.

Imported by __main__.py; it imports the facts and the config's forms below it."""
