build/tools/bench.o: tools/bench.c include/demo.h
include/demo.h:
