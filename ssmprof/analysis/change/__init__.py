"""Did it change, and what would it do elsewhere: compare, the gate, the history, projection to another GPU."""
