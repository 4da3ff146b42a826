"""Read-only Google Cloud look-ups used before anything is deployed (no cdktf here)."""
