# Empty dependencies file for test_pool.
# This may be replaced when dependencies are built.
