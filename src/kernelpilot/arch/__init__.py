"""Per-GPU facts (a data file with sources) and occupancy calculators."""
