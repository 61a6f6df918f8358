"""Tables, claims and figures from finished runs."""
