"""Pure tensor functions for linear recurrences; each `<op>_reference` is the definition."""

from statetrack.ops.delta_rule import delta_rule, delta_rule_reference

__all__ = ["delta_rule", "delta_rule_reference"]
