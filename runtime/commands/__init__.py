"""What the `skyhive` commands do: task files, `launch`, and the pools found from their logs (`ls`, `down`, `logs`)."""
