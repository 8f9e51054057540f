# Empty dependencies file for test_kernel_user.
# This may be replaced when dependencies are built.
