# Empty dependencies file for test_buf.
# This may be replaced when dependencies are built.
