"""Dagster orchestration of the rhythm lineage. All logic lives in rhythm_core; this package only
wires it into assets, resources, checks, jobs and schedules."""
