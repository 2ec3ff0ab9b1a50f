"""Graph rewrites on the graph IR: fold, drop, fuse and prune passes (after the frontend)."""
