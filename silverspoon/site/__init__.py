"""Site: runs -> pages and the command (papermill runner, bias cards, the `silverspoon` CLI)."""
