"""The read side: stored runs scored against the spec and the paper (`scoring`), rendered as reports
and plots (`report`, `plots`), the reproduction book (`book`), the experiments overview (`overview`)
and trained runs back in Python (`trained`)."""
