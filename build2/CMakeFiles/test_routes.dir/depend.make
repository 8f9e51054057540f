# Empty dependencies file for test_routes.
# This may be replaced when dependencies are built.
