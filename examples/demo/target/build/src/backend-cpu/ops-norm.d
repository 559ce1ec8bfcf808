build/src/backend-cpu/ops-norm.o: src/backend-cpu/ops-norm.c \
 src/backend-cpu/cpu-ops.h include/demo.h
src/backend-cpu/cpu-ops.h:
include/demo.h:
