"""Which cases: profiles, the Case, shards."""
