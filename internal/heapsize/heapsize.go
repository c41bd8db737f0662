// Package heapsize estimates the heap an allocation takes, for memory
// bounds kept in bytes (the checker's key table).
package heapsize

import "sort"

// classes are Go's small-object size classes (runtime/sizeclasses.go): an
// allocation of n bytes takes the smallest class that holds it.
var classes = []int{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288,
	320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304,
	2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288,
	13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// Of is the heap an allocation of n bytes takes: its size class, or whole
// 8 KiB pages above the largest class (0 for none).
func Of(n int) int64 {
	if n <= 0 {
		return 0
	}
	if i := sort.SearchInts(classes, n); i < len(classes) {
		return int64(classes[i])
	}
	return int64((n + 8191) &^ 8191)
}
