# Empty dependencies file for test_proctree.
# This may be replaced when dependencies are built.
