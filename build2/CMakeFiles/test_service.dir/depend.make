# Empty dependencies file for test_service.
# This may be replaced when dependencies are built.
