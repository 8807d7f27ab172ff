"""Built-in tasks: problem generators, teachers and rewards."""
