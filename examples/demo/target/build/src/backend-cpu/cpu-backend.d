build/src/backend-cpu/cpu-backend.o: src/backend-cpu/cpu-backend.c \
 src/backend-cpu/cpu-ops.h include/demo.h
src/backend-cpu/cpu-ops.h:
include/demo.h:
