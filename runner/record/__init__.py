"""The record: history, winners, re-decisions, reports and imports of other loops' logs."""
