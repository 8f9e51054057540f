# Empty dependencies file for test_vanished.
# This may be replaced when dependencies are built.
