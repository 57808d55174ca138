"""The CrossGuard policy pack (`pulumi preview --policy-pack policy`); the rules are in rules.py."""
