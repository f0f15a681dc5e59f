"""Static ISA analysis: parse SASS and AMDGCN into one model, analyze it, report findings."""
