// A doubly linked list threaded through its elements, so a connection moves between state lists
// in O(1) with no allocation (PgBouncer's StatList, Envoy's state lists).
#pragma once

#include <cstddef>

namespace pgfleet::base {

struct ListNode {
  ListNode* prev = nullptr;
  ListNode* next = nullptr;
  void* owner_list = nullptr;  // the list holding this node, or null
};

// `T` must derive from ListNode (one node = one list at a time).
template <typename T>
class IntrusiveList {
 public:
  IntrusiveList() = default;
  IntrusiveList(const IntrusiveList&) = delete;
  IntrusiveList& operator=(const IntrusiveList&) = delete;

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T* front() const { return static_cast<T*>(head_); }
  T* back() const { return static_cast<T*>(tail_); }
  static T* Next(const T* item) { return static_cast<T*>(item->next); }
  bool Contains(const T* item) const { return item->owner_list == this; }

  void PushBack(T* item) {
    ListNode* node = item;
    node->prev = tail_;
    node->next = nullptr;
    if (tail_ != nullptr) {
      tail_->next = node;
    } else {
      head_ = node;
    }
    tail_ = node;
    node->owner_list = this;
    ++size_;
  }
  void PushFront(T* item) {
    ListNode* node = item;
    node->prev = nullptr;
    node->next = head_;
    if (head_ != nullptr) {
      head_->prev = node;
    } else {
      tail_ = node;
    }
    head_ = node;
    node->owner_list = this;
    ++size_;
  }
  void Remove(T* item) {
    ListNode* node = item;
    if (node->prev != nullptr) {
      node->prev->next = node->next;
    } else {
      head_ = node->next;
    }
    if (node->next != nullptr) {
      node->next->prev = node->prev;
    } else {
      tail_ = node->prev;
    }
    node->prev = node->next = nullptr;
    node->owner_list = nullptr;
    --size_;
  }
  // Removes `item` from whichever IntrusiveList<T> holds it (no-op when none).
  static void RemoveFromOwner(T* item) {
    ListNode* node = item;
    if (node->owner_list != nullptr) static_cast<IntrusiveList*>(node->owner_list)->Remove(item);
  }
  T* PopFront() {
    T* item = front();
    if (item != nullptr) Remove(item);
    return item;
  }

 private:
  ListNode* head_ = nullptr;
  ListNode* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pgfleet::base
