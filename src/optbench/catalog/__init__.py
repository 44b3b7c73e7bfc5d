"""What can run: model specs (models/ is the zoo), techniques, tasks, devices, weights, user plugins."""
