build/src/graph.o: src/graph.c include/demo.h
include/demo.h:
