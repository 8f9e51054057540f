# Empty dependencies file for test_ws.
# This may be replaced when dependencies are built.
