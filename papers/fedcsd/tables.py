"""Tables of this paper come with the papers issue."""
TABLES = []
