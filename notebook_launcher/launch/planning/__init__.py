"""Before any worker starts: the user's settings, the plan made from them, the checks run on it,
and the claim that keeps one launch at a time per kernel."""
