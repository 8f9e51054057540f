# Empty dependencies file for test_wsmsg.
# This may be replaced when dependencies are built.
