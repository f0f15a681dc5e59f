"""Where jobs run: this machine (``local``: every visible GPU, or the CPU), a host over SSH, or a Ray cluster.
A job is an operation (check, bench, eval, profile), its options and its files (a content-addressed bundle);
the target runs it with the same kernelpilot and answers with the same JSON, saying where it ran."""
