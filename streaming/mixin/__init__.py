"""connmon's monitoring mixin: alert rules, recording rules, dashboards and deploy objects,
all generated from one ``MixinConfig``."""
