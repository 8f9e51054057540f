# Empty dependencies file for test_request.
# This may be replaced when dependencies are built.
