#include "testutil.h"
int main(void) { return lf_test_finish("test_nn"); }
