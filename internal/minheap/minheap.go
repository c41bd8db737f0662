// Package minheap is a binary min-heap of items that keep their own place
// in it, so that an item whose key changed moves, and any item leaves, in
// O(log n) without a search: the key table orders its keys by their next
// refresh in one per shard. Not safe for concurrent use.
package minheap

// Item is what a Heap holds: a pointer to something that keeps its index
// in the heap (-1 when in none) and orders by a key.
type Item interface {
	comparable
	HeapPlace() *int32
	HeapKey() int64
}

// Heap orders items by key, the least first; its zero value is empty.
type Heap[T Item] struct{ items []T }

// Len is the number of items in h.
func (h *Heap[T]) Len() int { return len(h.items) }

// Min is the item of the least key (h must not be empty).
func (h *Heap[T]) Min() T { return h.items[0] }

// Set puts v in h, or moves it to its place after its key changed.
func (h *Heap[T]) Set(v T) {
	if i := int(*v.HeapPlace()); i >= 0 {
		if !h.down(i) {
			h.up(i)
		}
		return
	}
	*v.HeapPlace() = int32(len(h.items))
	h.items = append(h.items, v)
	h.up(len(h.items) - 1)
}

// Pop takes the item of the least key out of h (h must not be empty).
func (h *Heap[T]) Pop() T {
	v := h.items[0]
	h.Remove(v)
	return v
}

// Remove takes v out of h; v must be in it.
func (h *Heap[T]) Remove(v T) {
	i, n := int(*v.HeapPlace()), len(h.items)-1
	if i != n {
		h.swap(i, n)
	}
	var zero T
	h.items[n] = zero // no reference kept past the end
	h.items = h.items[:n]
	*v.HeapPlace() = -1
	if i < n && !h.down(i) {
		h.up(i)
	}
}

func (h *Heap[T]) less(i, j int) bool { return h.items[i].HeapKey() < h.items[j].HeapKey() }

func (h *Heap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.items[i].HeapPlace(), *h.items[j].HeapPlace() = int32(i), int32(j)
}

func (h *Heap[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sinks item i to its place and reports whether it moved.
func (h *Heap[T]) down(i int) bool {
	start, n := i, len(h.items)
	for {
		m := 2*i + 1
		if m >= n {
			break
		}
		if r := m + 1; r < n && h.less(r, m) {
			m = r
		}
		if !h.less(m, i) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > start
}
