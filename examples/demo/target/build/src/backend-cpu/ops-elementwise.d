build/src/backend-cpu/ops-elementwise.o: \
 src/backend-cpu/ops-elementwise.c src/backend-cpu/cpu-ops.h \
 include/demo.h
src/backend-cpu/cpu-ops.h:
include/demo.h:
