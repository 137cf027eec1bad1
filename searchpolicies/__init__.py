"""Search policies: the SearchPolicy protocol, beam, parallel, greedy, and plugins."""
