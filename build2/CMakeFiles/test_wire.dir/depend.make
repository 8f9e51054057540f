# Empty dependencies file for test_wire.
# This may be replaced when dependencies are built.
